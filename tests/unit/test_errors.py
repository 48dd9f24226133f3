"""Typed errors carry Kafka's error code, retriable flag and location, and survive pickling."""
from __future__ import annotations

import pickle

import pytest

import engine
import engine.common.errors as E

# Kafka's protocol error codes (org.apache.kafka.common.protocol.Errors) and retriability
KAFKA = {
    E.OffsetOutOfRangeError: (1, False), E.CorruptRecordError: (2, True),
    E.UnknownTopicOrPartitionError: (3, True), E.RecordTooLargeError: (10, False),
    E.InvalidTopicError: (17, False), E.RecordBatchTooLargeError: (18, False),
    E.NotEnoughReplicasError: (19, True), E.InvalidRequiredAcksError: (21, False), E.InvalidTimestampError: (32, False),
    E.UnsupportedVersionError: (35, False), E.TopicAlreadyExistsError: (36, False),
    E.InvalidConfigurationError: (40, False), E.UnsupportedMessageFormatError: (43, False),
    E.OutOfOrderSequenceError: (45, False), E.DuplicateSequenceError: (46, False),
    E.InvalidProducerEpochError: (47, False), E.KafkaStorageError: (56, True),
    E.UnsupportedCompressionTypeError: (76, False), E.InvalidRecordError: (87, False),
    E.ProducerFencedError: (90, False),
}


@pytest.mark.parametrize("cls", KAFKA, ids=lambda c: c.__name__)
def test_codes_and_retriability_mirror_kafka(cls):
    assert (cls.code, cls.retriable) == KAFKA[cls]
    assert issubclass(cls, E.KafkaError) and getattr(engine, cls.__name__) is cls


def test_location_is_rendered_and_pickles():
    err = E.CorruptRecordError("bad crc", file="/d/t-0/0.log", position=4096, offset=77)
    assert str(err) == "bad crc (file /d/t-0/0.log, position 4096, offset 77)"
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is E.CorruptRecordError and str(back) == str(err)


def test_not_supported_yet_is_explicit():
    err = E.not_supported_yet("replication_factor=3")
    assert isinstance(err, E.UnsupportedVersionError) and "not supported yet" in str(err)
