"""A faust-streaming worker: an agent counts each word in a table (kept in memory, so a restarted worker has only the
changelog topic faust writes to rebuild it from) and sends each new count to an output topic.

Usage: python faust_app.py BOOTSTRAP DATA_DIR INPUT OUTPUT   (runs until SIGTERM)
"""
import sys

import faust


def main(bootstrap: str, data_dir: str, source: str, sink: str) -> None:
    app = faust.App("faust-counts", broker=f"kafka://{bootstrap}", store="memory://", datadir=data_dir,
                    topic_partitions=2, web_enabled=False)
    words = app.topic(source, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    counts_out = app.topic(sink, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    counts = app.Table("counts", default=int, partitions=2)

    @app.agent(words)
    async def count(stream):
        async for event in stream.events():
            word = event.key.decode()
            counts[word] += 1
            await counts_out.send(key=event.key, value=b"%d" % counts[word])

    sys.argv = [sys.argv[0], "worker", "--loglevel", "warn"]
    app.main()


if __name__ == "__main__":
    main(*sys.argv[1:5])
