"""The share group APIs' messages (KIP-932), defined into engine.protocol.messages' `APIS`: ShareGroupHeartbeat (76),
ShareGroupDescribe (77), ShareFetch (78) and ShareAcknowledge (79), versions 0 and 1: version 1 is the one Kafka 4.1
made them generally available with (librdkafka's share consumer sends it), version 0 the early-access one of Kafka
4.0 (its Java KafkaShareConsumer sends it). They differ in ShareFetch alone: v0 has a byte limit per partition, v1
MaxRecords and BatchSize instead, and its response gives the acquisition lock's duration. ShareFetch and
ShareAcknowledge v2 are Kafka 4.2's: the acquire mode (KIP-1206's record_limit) and the RENEW acknowledgement with
IsRenewAck (KIP-1222), and ShareAcknowledge's response gives the lock's duration too. Beside them, the share
group offsets APIs of Kafka 4.1: DescribeShareGroupOffsets (90, v0; v1 of Kafka 4.2 adds the lag),
AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92).
Thread-safety: module constants, immutable after import.
"""
from __future__ import annotations

from engine.protocol.messages import define

_TOPIC_PARTITIONS = """
      topic_id uuid 0+
      partitions []int32 0+
"""
_ACK_BATCHES = """
      acknowledgement_batches [] 0+
        first_offset int64 0+
        last_offset int64 0+
        acknowledge_types []int8 0+
"""
_LEADER_AND_ENDPOINTS = ("""
      current_leader {} 0+
        leader_id int32 0+ default=-1
        leader_epoch int32 0+ default=-1
""", """
  node_endpoints [] 0+
    node_id int32 0+
    host string 0+
    port int32 0+
    rack string 0+ null=0+ default=null
""")

SHARE_GROUP_HEARTBEAT = define(76, "ShareGroupHeartbeat", "0-1", 0, """
  group_id string 0+
  member_id string 0+
  member_epoch int32 0+
  rack_id string 0+ null=0+ default=null
  subscribed_topic_names []string 0+ null=0+ default=null
""", """
  throttle_time_ms int32 0+
  error_code int16 0+
  error_message string 0+ null=0+ default=null
  member_id string 0+ null=0+ default=null
  member_epoch int32 0+
  heartbeat_interval_ms int32 0+
  assignment {} 0+ null=0+ default=null
    topic_partitions [] 0+""" + _TOPIC_PARTITIONS)

SHARE_GROUP_DESCRIBE = define(77, "ShareGroupDescribe", "0-1", 0, """
  group_ids []string 0+
  include_authorized_operations bool 0+
""", """
  throttle_time_ms int32 0+
  groups [] 0+
    error_code int16 0+
    error_message string 0+ null=0+ default=null
    group_id string 0+
    group_state string 0+
    group_epoch int32 0+
    assignment_epoch int32 0+
    assignor_name string 0+
    members [] 0+
      member_id string 0+
      rack_id string 0+ null=0+ default=null
      member_epoch int32 0+
      client_id string 0+
      client_host string 0+
      subscribed_topic_names []string 0+
      assignment {} 0+
        topic_partitions [] 0+
          topic_id uuid 0+
          topic_name string 0+
          partitions []int32 0+
    authorized_operations int32 0+ default=-2147483648
""")

SHARE_FETCH = define(78, "ShareFetch", "0-2", 0, """
  group_id string 0+ null=0+ default=null
  member_id string 0+ null=0+
  share_session_epoch int32 0+
  max_wait_ms int32 0+
  min_bytes int32 0+
  max_bytes int32 0+ default=2147483647
  max_records int32 1+ default=500
  batch_size int32 1+ default=500
  share_acquire_mode int8 2+ default=0
  is_renew_ack bool 2+ default=false
  topics [] 0+
    topic_id uuid 0+
    partitions [] 0+
      partition_index int32 0+
      partition_max_bytes int32 0 ignorable""" + _ACK_BATCHES + """
  forgotten_topics_data [] 0+""" + _TOPIC_PARTITIONS.replace("      ", "    "), """
  throttle_time_ms int32 0+
  error_code int16 0+
  error_message string 0+ null=0+ default=null
  acquisition_lock_timeout_ms int32 1+ ignorable
  responses [] 0+
    topic_id uuid 0+
    partitions [] 0+
      partition_index int32 0+
      error_code int16 0+
      error_message string 0+ null=0+ default=null
      acknowledge_error_code int16 0+
      acknowledge_error_message string 0+ null=0+ default=null""" + _LEADER_AND_ENDPOINTS[0] + """      records records 0+ null=0
      acquired_records [] 0+
        first_offset int64 0+
        last_offset int64 0+
        delivery_count int16 0+""" + _LEADER_AND_ENDPOINTS[1])

SHARE_ACKNOWLEDGE = define(79, "ShareAcknowledge", "0-2", 0, """
  group_id string 0+ null=0+ default=null
  member_id string 0+ null=0+
  share_session_epoch int32 0+
  is_renew_ack bool 2+ default=false
  topics [] 0+
    topic_id uuid 0+
    partitions [] 0+
      partition_index int32 0+""" + _ACK_BATCHES, """
  throttle_time_ms int32 0+
  error_code int16 0+
  error_message string 0+ null=0+ default=null
  acquisition_lock_timeout_ms int32 2+ ignorable
  responses [] 0+
    topic_id uuid 0+
    partitions [] 0+
      partition_index int32 0+
      error_code int16 0+
      error_message string 0+ null=0+ default=null""" + _LEADER_AND_ENDPOINTS[0] + _LEADER_AND_ENDPOINTS[1])


# The share group offsets admin APIs of Kafka 4.1 (kafka-share-groups.sh --describe, --reset-offsets and
# --delete-offsets send them); DescribeShareGroupOffsets v1 (Kafka 4.2) adds each share-partition's lag.
DESCRIBE_SHARE_GROUP_OFFSETS = define(90, "DescribeShareGroupOffsets", "0-1", 0, """
  groups [] 0+
    group_id string 0+
    topics [] 0+ null=0+
      topic_name string 0+
      partitions []int32 0+
""", """
  throttle_time_ms int32 0+
  groups [] 0+
    group_id string 0+
    topics [] 0+
      topic_name string 0+
      topic_id uuid 0+
      partitions [] 0+
        partition_index int32 0+
        start_offset int64 0+
        leader_epoch int32 0+
        lag int64 1+ default=-1 ignorable
        error_code int16 0+
        error_message string 0+ null=0+ default=null
    error_code int16 0+
    error_message string 0+ null=0+ default=null
""")

ALTER_SHARE_GROUP_OFFSETS = define(91, "AlterShareGroupOffsets", "0", 0, """
  group_id string 0+
  topics [] 0+
    topic_name string 0+
    partitions [] 0+
      partition_index int32 0+
      start_offset int64 0+
""", """
  throttle_time_ms int32 0+
  error_code int16 0+
  error_message string 0+ null=0+ default=null
  responses [] 0+
    topic_name string 0+
    topic_id uuid 0+
    partitions [] 0+
      partition_index int32 0+
      error_code int16 0+
      error_message string 0+ null=0+ default=null
""")

DELETE_SHARE_GROUP_OFFSETS = define(92, "DeleteShareGroupOffsets", "0", 0, """
  group_id string 0+
  topics [] 0+
    topic_name string 0+
""", """
  throttle_time_ms int32 0+
  error_code int16 0+
  error_message string 0+ null=0+ default=null
  responses [] 0+
    topic_name string 0+
    topic_id uuid 0+
    error_code int16 0+
    error_message string 0+ null=0+ default=null
""")
