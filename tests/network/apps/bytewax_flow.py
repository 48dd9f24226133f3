"""A bytewax dataflow: KafkaSource reads an input topic to its end (tail=False), each value upper-cased, KafkaSink
writes it with its key to an output topic.

Usage: python -m bytewax.run bytewax_flow:flow   with KAFKALOG_BOOTSTRAP, KAFKALOG_INPUT and KAFKALOG_OUTPUT set
"""
import os

import bytewax.operators as op
from bytewax.connectors.kafka import KafkaSink, KafkaSinkMessage, KafkaSource
from bytewax.dataflow import Dataflow

flow = Dataflow("kafkalog-upper")
messages = op.input("in", flow, KafkaSource([os.environ["KAFKALOG_BOOTSTRAP"]], [os.environ["KAFKALOG_INPUT"]],
                                             tail=False))
upper = op.map("upper", messages, lambda m: KafkaSinkMessage(m.key, m.value.upper()))
op.output("out", upper, KafkaSink([os.environ["KAFKALOG_BOOTSTRAP"]], os.environ["KAFKALOG_OUTPUT"]))
