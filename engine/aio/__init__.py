"""asyncio clients over an open engine, named and shaped as aiokafka's (engine.aio.producer, engine.aio.consumer):
`AIOKafkaProducer(engine=eng, ...)` and `AIOKafkaConsumer(*topics, engine=eng, ...)`, and a share group's member,
`AIOShareConsumer(*topics, engine=eng, group_id=...)` (engine.aio.share_consumer). No thread per call and no
polling: a waiting consumer is woken by the append it waits for, a waiting send by its batch's append."""
from engine.aio.consumer import AIOKafkaConsumer, ConsumerRebalanceListener
from engine.aio.producer import AIOKafkaProducer, BatchBuilder
from engine.aio.share_consumer import AIOShareConsumer

__all__ = ["AIOKafkaConsumer", "AIOKafkaProducer", "AIOShareConsumer", "BatchBuilder", "ConsumerRebalanceListener"]
