"""The APIs the listener speaks: each one's key, the versions kafkalog accepts, its first flexible version, and the
fields of its request and response in the notation of engine.protocol.schema (field names and versions are those
of Kafka's published message schemas, in snake case).

The advertised ranges start where RecordBatch v2 does (Produce 3, Fetch 4: kafkalog stores no older format). Produce
goes to v12, a transactions v2 client's, which adds its partition to the transaction itself (v13 addresses topics by
id); Fetch goes to v17, which addresses topics by id (v13+).
The admin and cluster APIs' messages (topics, configs, records' deletion, the cluster's description, elections, log
directories, reassignments) are engine.protocol.admin_messages', which defines them into the same `APIS` (the
package imports both).
Thread-safety: module constants, immutable after import.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.protocol.schema import Field, parse_fields


@dataclass(frozen=True)
class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    flexible_from: int          # the first flexible version (compact fields, tagged fields, header v2/v1)
    request: list[Field]
    response: list[Field]

    def flexible(self, version: int) -> bool:
        return version >= self.flexible_from

    def request_header_version(self, version: int) -> int:
        return 2 if self.flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        """ApiVersions always answers with header v0: a client reads it before it knows what the broker speaks."""
        return 1 if self.flexible(version) and self.key != 18 else 0


REQUEST_HEADER = parse_fields("""
  request_api_key int16 0+
  request_api_version int16 0+
  correlation_id int32 0+
  client_id string 1+ null=1+ ignorable noflex
""")
RESPONSE_HEADER = parse_fields("""
  correlation_id int32 0+
""")

APIS: dict[int, Api] = {}


def define(key: int, name: str, versions: str, flexible_from: int, request: str, response: str) -> Api:
    lo, _, hi = versions.partition("-")
    api = Api(key, name, int(lo), int(hi or lo), flexible_from, parse_fields(request), parse_fields(response))
    APIS[key] = api
    return api


PRODUCE = define(0, "Produce", "3-12", 9, """
  transactional_id string 3+ null=3+ default=null
  acks int16 0+
  timeout_ms int32 0+
  topic_data [] 0+
    name string 0+
    partition_data [] 0+
      index int32 0+
      records records 0+ null=0+
""", """
  responses [] 0+
    name string 0+
    partition_responses [] 0+
      index int32 0+
      error_code int16 0+
      base_offset int64 0+
      log_append_time_ms int64 2+ default=-1 ignorable
      log_start_offset int64 5+ default=-1 ignorable
      record_errors [] 8+ ignorable
        batch_index int32 8+
        batch_index_error_message string 8+ null=8+ default=null
      error_message string 8+ null=8+ default=null ignorable
      current_leader {} 10+ tag=0
        leader_id int32 10+ default=-1
        leader_epoch int32 10+ default=-1
  throttle_time_ms int32 1+ default=0 ignorable
  node_endpoints [] 10+ tag=0
    node_id int32 10+
    host string 10+
    port int32 10+
    rack string 10+ null=10+ default=null
""")

FETCH = define(1, "Fetch", "4-17", 12, """
  cluster_id string 12+ null=12+ tag=0 default=null ignorable
  replica_id int32 0-14 default=-1
  replica_state {} 15+ tag=1
    replica_id int32 15+ default=-1
    replica_epoch int64 15+ default=-1
  max_wait_ms int32 0+
  min_bytes int32 0+
  max_bytes int32 3+ default=0x7fffffff ignorable
  isolation_level int8 4+ default=0 ignorable
  session_id int32 7+ default=0 ignorable
  session_epoch int32 7+ default=-1 ignorable
  topics [] 0+
    topic string 0-12 ignorable
    topic_id uuid 13+ ignorable
    partitions [] 0+
      partition int32 0+
      current_leader_epoch int32 9+ default=-1 ignorable
      fetch_offset int64 0+
      last_fetched_epoch int32 12+ default=-1
      log_start_offset int64 5+ default=-1 ignorable
      partition_max_bytes int32 0+
      replica_directory_id uuid 17+ tag=0 ignorable
  forgotten_topics_data [] 7+
    topic string 7-12 ignorable
    topic_id uuid 13+ ignorable
    partitions []int32 7+
  rack_id string 11+ default= ignorable
""", """
  throttle_time_ms int32 1+ ignorable
  error_code int16 7+ ignorable
  session_id int32 7+ default=0
  responses [] 0+
    topic string 0-12 ignorable
    topic_id uuid 13+ ignorable
    partitions [] 0+
      partition_index int32 0+
      error_code int16 0+
      high_watermark int64 0+
      last_stable_offset int64 4+ default=-1 ignorable
      log_start_offset int64 5+ default=-1 ignorable
      diverging_epoch {} 12+ tag=0
        epoch int32 12+ default=-1
        end_offset int64 12+ default=-1
      current_leader {} 12+ tag=1
        leader_id int32 12+ default=-1
        leader_epoch int32 12+ default=-1
      aborted_transactions [] 4+ null=4+ ignorable
        producer_id int64 4+
        first_offset int64 4+
      preferred_read_replica int32 11+ default=-1
      records records 0+ null=0+
  node_endpoints [] 16+ tag=0
    node_id int32 16+
    host string 16+
    port int32 16+
    rack string 16+ null=16+ default=null
""")

LIST_OFFSETS = define(2, "ListOffsets", "1-10", 6, """
  replica_id int32 0+
  isolation_level int8 2+
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      current_leader_epoch int32 4+ default=-1 ignorable
      timestamp int64 0+
  timeout_ms int32 10+ ignorable
""", """
  throttle_time_ms int32 2+ ignorable
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      error_code int16 0+
      timestamp int64 1+ default=-1
      offset int64 1+ default=-1
      leader_epoch int32 4+ default=-1
""")

METADATA = define(3, "Metadata", "0-13", 9, """
  topics [] 0+ null=1+
    topic_id uuid 10+ ignorable
    name string 0+ null=10+
  allow_auto_topic_creation bool 4+ default=true
  include_cluster_authorized_operations bool 8-10
  include_topic_authorized_operations bool 8+
""", """
  throttle_time_ms int32 3+ ignorable
  brokers [] 0+
    node_id int32 0+
    host string 0+
    port int32 0+
    rack string 1+ null=1+ default=null ignorable
  cluster_id string 2+ null=2+ default=null ignorable
  controller_id int32 1+ default=-1 ignorable
  topics [] 0+
    error_code int16 0+
    name string 0+ null=12+
    topic_id uuid 10+ ignorable
    is_internal bool 1+ default=false ignorable
    partitions [] 0+
      error_code int16 0+
      partition_index int32 0+
      leader_id int32 0+
      leader_epoch int32 7+ default=-1 ignorable
      replica_nodes []int32 0+
      isr_nodes []int32 0+
      offline_replicas []int32 5+ ignorable
    topic_authorized_operations int32 8+ default=-2147483648
  cluster_authorized_operations int32 8-10 default=-2147483648 ignorable
  error_code int16 13+ ignorable
""")

FIND_COORDINATOR = define(10, "FindCoordinator", "0-5", 3, """
  key string 0-3
  key_type int8 1+ default=0
  coordinator_keys []string 4+
""", """
  throttle_time_ms int32 1+ ignorable
  error_code int16 0-3
  error_message string 1-3 null=1-3 ignorable
  node_id int32 0-3
  host string 0-3
  port int32 0-3
  coordinators [] 4+
    key string 4+
    node_id int32 4+
    host string 4+
    port int32 4+
    error_code int16 4+
    error_message string 4+ null=4+ ignorable
""")

API_VERSIONS = define(18, "ApiVersions", "0-4", 3, """
  client_software_name string 3+ ignorable
  client_software_version string 3+ ignorable
""", """
  error_code int16 0+
  api_keys [] 0+
    api_key int16 0+
    min_version int16 0+
    max_version int16 0+
  throttle_time_ms int32 1+ ignorable
  supported_features [] 3+ tag=0 ignorable
    name string 3+
    min_version int16 3+
    max_version int16 3+
  finalized_features_epoch int64 3+ tag=1 default=-1 ignorable
  finalized_features [] 3+ tag=2 ignorable
    name string 3+
    max_version_level int16 3+
    min_version_level int16 3+
""")

INIT_PRODUCER_ID = define(22, "InitProducerId", "0-5", 2, """
  transactional_id string 0+ null=0+
  transaction_timeout_ms int32 0+
  producer_id int64 3+ default=-1
  producer_epoch int16 3+ default=-1
""", """
  throttle_time_ms int32 0+ ignorable
  error_code int16 0+
  producer_id int64 0+ default=-1
  producer_epoch int16 0+
""")

OFFSET_COMMIT = define(8, "OffsetCommit", "2-9", 8, """
  group_id string 0+
  generation_id_or_member_epoch int32 1+ default=-1 ignorable
  member_id string 1+ ignorable
  group_instance_id string 7+ null=7+ default=null
  retention_time_ms int64 2-4 default=-1 ignorable
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      committed_offset int64 0+
      committed_leader_epoch int32 6+ default=-1 ignorable
      commit_timestamp int64 1 default=-1
      committed_metadata string 0+ null=0+
""", """
  throttle_time_ms int32 3+ ignorable
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      error_code int16 0+
""")

OFFSET_FETCH = define(9, "OffsetFetch", "1-9", 6, """
  group_id string 0-7
  topics [] 0-7 null=2-7
    name string 0-7
    partition_indexes []int32 0-7
  groups [] 8+
    group_id string 8+
    member_id string 9+ null=9+ default=null ignorable
    member_epoch int32 9+ default=-1 ignorable
    topics [] 8+ null=8+
      name string 8+
      partition_indexes []int32 8+
  require_stable bool 7+ default=false
""", """
  throttle_time_ms int32 3+ ignorable
  topics [] 0-7
    name string 0-7
    partitions [] 0-7
      partition_index int32 0-7
      committed_offset int64 0-7
      committed_leader_epoch int32 5-7 default=-1 ignorable
      metadata string 0-7 null=0-7
      error_code int16 0-7
  error_code int16 2-7 default=0 ignorable
  groups [] 8+
    group_id string 8+
    topics [] 8+
      name string 8+
      partitions [] 8+
        partition_index int32 8+
        committed_offset int64 8+
        committed_leader_epoch int32 8+ default=-1 ignorable
        metadata string 8+ null=8+
        error_code int16 8+
    error_code int16 8+ default=0
""")

JOIN_GROUP = define(11, "JoinGroup", "0-9", 6, """
  group_id string 0+
  session_timeout_ms int32 0+
  rebalance_timeout_ms int32 1+ default=-1 ignorable
  member_id string 0+
  group_instance_id string 5+ null=5+ default=null
  protocol_type string 0+
  protocols [] 0+
    name string 0+
    metadata bytes 0+
  reason string 8+ null=8+ default=null ignorable
""", """
  throttle_time_ms int32 2+ ignorable
  error_code int16 0+
  generation_id int32 0+ default=-1
  protocol_type string 7+ null=7+ default=null ignorable
  protocol_name string 0+ null=7+
  leader string 0+
  skip_assignment bool 9+ default=false
  member_id string 0+
  members [] 0+
    member_id string 0+
    group_instance_id string 5+ null=5+ default=null ignorable
    metadata bytes 0+
""")

HEARTBEAT = define(12, "Heartbeat", "0-4", 4, """
  group_id string 0+
  generation_id int32 0+
  member_id string 0+
  group_instance_id string 3+ null=3+ default=null
""", """
  throttle_time_ms int32 1+ ignorable
  error_code int16 0+
""")

LEAVE_GROUP = define(13, "LeaveGroup", "0-5", 4, """
  group_id string 0+
  member_id string 0-2
  members [] 3+
    member_id string 3+
    group_instance_id string 3+ null=3+ default=null
    reason string 5+ null=5+ default=null ignorable
""", """
  throttle_time_ms int32 1+ ignorable
  error_code int16 0+
  members [] 3+
    member_id string 3+
    group_instance_id string 3+ null=3+
    error_code int16 3+
""")

SYNC_GROUP = define(14, "SyncGroup", "0-5", 4, """
  group_id string 0+
  generation_id int32 0+
  member_id string 0+
  group_instance_id string 3+ null=3+ default=null
  protocol_type string 5+ null=5+ default=null ignorable
  protocol_name string 5+ null=5+ default=null ignorable
  assignments [] 0+
    member_id string 0+
    assignment bytes 0+
""", """
  throttle_time_ms int32 1+ ignorable
  error_code int16 0+
  protocol_type string 5+ null=5+ default=null ignorable
  protocol_name string 5+ null=5+ default=null ignorable
  assignment bytes 0+
""")

ADD_PARTITIONS_TO_TXN = define(24, "AddPartitionsToTxn", "0-3", 3, """
  v3_and_below_transactional_id string 0-3
  v3_and_below_producer_id int64 0-3
  v3_and_below_producer_epoch int16 0-3
  v3_and_below_topics [] 0-3
    name string 0+
    partitions []int32 0+
""", """
  throttle_time_ms int32 0+
  results_by_topic_v3_and_below [] 0-3
    name string 0+
    results_by_partition [] 0+
      partition_index int32 0+
      partition_error_code int16 0+
""")

ADD_OFFSETS_TO_TXN = define(25, "AddOffsetsToTxn", "0-4", 3, """
  transactional_id string 0+
  producer_id int64 0+
  producer_epoch int16 0+
  group_id string 0+
""", """
  throttle_time_ms int32 0+
  error_code int16 0+
""")

END_TXN = define(26, "EndTxn", "0-5", 3, """
  transactional_id string 0+
  producer_id int64 0+
  producer_epoch int16 0+
  committed bool 0+
""", """
  throttle_time_ms int32 0+
  error_code int16 0+
  producer_id int64 5+ default=-1 ignorable
  producer_epoch int16 5+ default=-1 ignorable
""")

TXN_OFFSET_COMMIT = define(28, "TxnOffsetCommit", "0-5", 3, """
  transactional_id string 0+
  group_id string 0+
  producer_id int64 0+
  producer_epoch int16 0+
  generation_id int32 3+ default=-1
  member_id string 3+ default=
  group_instance_id string 3+ null=3+ default=null
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      committed_offset int64 0+
      committed_leader_epoch int32 2+ default=-1 ignorable
      committed_metadata string 0+ null=0+
""", """
  throttle_time_ms int32 0+
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      error_code int16 0+
""")

LIST_GROUPS = define(16, "ListGroups", "0-5", 3, """
  states_filter []string 4+
  types_filter []string 5+
""", """
  throttle_time_ms int32 1+ ignorable
  error_code int16 0+
  groups [] 0+
    group_id string 0+
    protocol_type string 0+
    group_state string 4+ ignorable
    group_type string 5+ ignorable
""")

DESCRIBE_GROUPS = define(15, "DescribeGroups", "0-5", 5, """
  groups []string 0+
  include_authorized_operations bool 3+
""", """
  throttle_time_ms int32 1+ ignorable
  groups [] 0+
    error_code int16 0+
    group_id string 0+
    group_state string 0+
    protocol_type string 0+
    protocol_data string 0+
    members [] 0+
      member_id string 0+
      group_instance_id string 4+ null=4+ default=null ignorable
      client_id string 0+
      client_host string 0+
      member_metadata bytes 0+
      member_assignment bytes 0+
    authorized_operations int32 3+ default=-2147483648
""")

DELETE_GROUPS = define(42, "DeleteGroups", "0-2", 2, """
  groups_names []string 0+
""", """
  throttle_time_ms int32 0+
  results [] 0+
    group_id string 0+
    error_code int16 0+
""")

CONSUMER_GROUP_HEARTBEAT = define(68, "ConsumerGroupHeartbeat", "0-1", 0, """
  group_id string 0+
  member_id string 0+
  member_epoch int32 0+
  instance_id string 0+ null=0+ default=null
  rack_id string 0+ null=0+ default=null
  rebalance_timeout_ms int32 0+ default=-1
  subscribed_topic_names []string 0+ null=0+ default=null
  subscribed_topic_regex string 1+ null=1+ default=null
  server_assignor string 0+ null=0+ default=null
  topic_partitions [] 0+ null=0+ default=null
    topic_id uuid 0+
    partitions []int32 0+
""", """
  throttle_time_ms int32 0+
  error_code int16 0+
  error_message string 0+ null=0+ default=null
  member_id string 0+ null=0+ default=null
  member_epoch int32 0+
  heartbeat_interval_ms int32 0+
  assignment {} 0+ null=0+ default=null
    topic_partitions [] 0+
      topic_id uuid 0+
      partitions []int32 0+
""")

CONSUMER_GROUP_DESCRIBE = define(69, "ConsumerGroupDescribe", "0", 0, """
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
      instance_id string 0+ null=0+ default=null
      rack_id string 0+ null=0+ default=null
      member_epoch int32 0+
      client_id string 0+
      client_host string 0+
      subscribed_topic_names []string 0+
      subscribed_topic_regex string 0+ null=0+ default=null
      assignment {} 0+
        topic_partitions [] 0+
          topic_id uuid 0+
          topic_name string 0+
          partitions []int32 0+
      target_assignment {} 0+
        topic_partitions [] 0+
          topic_id uuid 0+
          topic_name string 0+
          partitions []int32 0+
    authorized_operations int32 0+ default=-2147483648
""")

OFFSET_FOR_LEADER_EPOCH = define(23, "OffsetForLeaderEpoch", "0-4", 4, """
  replica_id int32 3+ default=-2 ignorable
  topics [] 0+
    topic string 0+
    partitions [] 0+
      partition int32 0+
      current_leader_epoch int32 2+ default=-1 ignorable
      leader_epoch int32 0+
""", """
  throttle_time_ms int32 2+ ignorable
  topics [] 0+
    topic string 0+
    partitions [] 0+
      error_code int16 0+
      partition int32 0+
      leader_epoch int32 1+ default=-1 ignorable
      end_offset int64 0+ default=-1
""")

DESCRIBE_PRODUCERS = define(61, "DescribeProducers", "0", 0, """
  topics [] 0+
    name string 0+
    partition_indexes []int32 0+
""", """
  throttle_time_ms int32 0+
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      error_code int16 0+
      error_message string 0+ null=0+ default=null
      active_producers [] 0+
        producer_id int64 0+
        producer_epoch int32 0+
        last_sequence int32 0+ default=-1
        last_timestamp int64 0+ default=-1
        coordinator_epoch int32 0+
        current_txn_start_offset int64 0+ default=-1
""")

DESCRIBE_TRANSACTIONS = define(65, "DescribeTransactions", "0", 0, """
  transactional_ids []string 0+
""", """
  throttle_time_ms int32 0+
  transaction_states [] 0+
    error_code int16 0+
    transactional_id string 0+
    transaction_state string 0+
    transaction_timeout_ms int32 0+
    transaction_start_time_ms int64 0+
    producer_id int64 0+
    producer_epoch int16 0+
    topics [] 0+
      topic string 0+
      partitions []int32 0+
""")

LIST_TRANSACTIONS = define(66, "ListTransactions", "0-1", 0, """
  state_filters []string 0+
  producer_id_filters []int64 0+
  duration_filter int64 1+ default=-1
""", """
  throttle_time_ms int32 0+
  error_code int16 0+
  unknown_state_filters []string 0+
  transaction_states [] 0+
    transactional_id string 0+
    producer_id int64 0+
    transaction_state string 0+
""")

SASL_HANDSHAKE = define(17, "SaslHandshake", "1", 1 << 15, """
  mechanism string 0+
""", """
  error_code int16 0+
  mechanisms []string 0+
""")

SASL_AUTHENTICATE = define(36, "SaslAuthenticate", "0-2", 2, """
  auth_bytes bytes 0+
""", """
  error_code int16 0+
  error_message string 0+ null=0+
  auth_bytes bytes 0+
  session_lifetime_ms int64 1+ default=0 ignorable
""")
