"""A FastStream application: a subscriber in a consumer group that publishes each number doubled, with the name of
the member that handled it, to an output topic.

Usage: python faststream_app.py BOOTSTRAP INPUT OUTPUT MEMBER   (runs until SIGTERM)
"""
import asyncio
import sys

from faststream import FastStream
from faststream.kafka import KafkaBroker


def main(bootstrap: str, source: str, sink: str, member: str) -> None:
    broker = KafkaBroker(bootstrap)

    @broker.subscriber(source, group_id="faststream-doublers", auto_offset_reset="earliest")
    @broker.publisher(sink)
    async def double(n: int) -> dict:
        return {"n": 2 * n, "member": member}

    asyncio.run(FastStream(broker).run())


if __name__ == "__main__":
    main(*sys.argv[1:5])
