"""The admin and cluster APIs the listener speaks, as engine.protocol.messages defines the others (into the same
`APIS`): topics (CreateTopics, DeleteTopics, CreatePartitions), records' deletion (DeleteRecords), configs
(DescribeConfigs, IncrementalAlterConfigs), the cluster's description (DescribeCluster, DescribeTopicPartitions) and
what a one-node cluster answers of elections, log directories and reassignments.
Thread-safety: module constants, immutable after import.
"""
from __future__ import annotations

from engine.protocol.messages import define

CREATE_TOPICS = define(19, "CreateTopics", "0-7", 5, """
  topics [] 0+
    name string 0+
    num_partitions int32 0+
    replication_factor int16 0+
    assignments [] 0+
      partition_index int32 0+
      broker_ids []int32 0+
    configs [] 0+
      name string 0+
      value string 0+ null=0+
  timeout_ms int32 0+ default=60000
  validate_only bool 1+ default=false
""", """
  throttle_time_ms int32 2+ ignorable
  topics [] 0+
    name string 0+
    topic_id uuid 7+ ignorable
    error_code int16 0+
    error_message string 1+ null=0+ ignorable
    topic_config_error_code int16 5+ tag=0 ignorable
    num_partitions int32 5+ default=-1 ignorable
    replication_factor int16 5+ default=-1 ignorable
    configs [] 5+ null=5+ ignorable
      name string 5+
      value string 5+ null=5+
      read_only bool 5+
      config_source int8 5+ default=-1 ignorable
      is_sensitive bool 5+
""")

DELETE_TOPICS = define(20, "DeleteTopics", "0-5", 4, """
  topic_names []string 0-5 ignorable
  timeout_ms int32 0+
""", """
  throttle_time_ms int32 1+ ignorable
  responses [] 0+
    name string 0+ null=6+
    error_code int16 0+
    error_message string 5+ null=5+ default=null ignorable
""")

DELETE_RECORDS = define(21, "DeleteRecords", "0-2", 2, """
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      offset int64 0+
  timeout_ms int32 0+
""", """
  throttle_time_ms int32 0+
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      low_watermark int64 0+
      error_code int16 0+
""")

DESCRIBE_CONFIGS = define(32, "DescribeConfigs", "0-4", 4, """
  resources [] 0+
    resource_type int8 0+
    resource_name string 0+
    configuration_keys []string 0+ null=0+
  include_synonyms bool 1+ default=false
  include_documentation bool 3+ default=false
""", """
  throttle_time_ms int32 0+
  results [] 0+
    error_code int16 0+
    error_message string 0+ null=0+
    resource_type int8 0+
    resource_name string 0+
    configs [] 0+
      name string 0+
      value string 0+ null=0+
      read_only bool 0+
      is_default bool 0
      config_source int8 1+ default=-1 ignorable
      is_sensitive bool 0+
      synonyms [] 1+ ignorable
        name string 1+
        value string 1+ null=0+
        source int8 1+
      config_type int8 3+ default=0 ignorable
      documentation string 3+ null=0+ ignorable
""")

CREATE_PARTITIONS = define(37, "CreatePartitions", "0-3", 2, """
  topics [] 0+
    name string 0+
    count int32 0+
    assignments [] 0+ null=0+
      broker_ids []int32 0+
  timeout_ms int32 0+
  validate_only bool 0+
""", """
  throttle_time_ms int32 0+
  results [] 0+
    name string 0+
    error_code int16 0+
    error_message string 0+ null=0+ default=null
""")

INCREMENTAL_ALTER_CONFIGS = define(44, "IncrementalAlterConfigs", "0-1", 1, """
  resources [] 0+
    resource_type int8 0+
    resource_name string 0+
    configs [] 0+
      name string 0+
      config_operation int8 0+
      value string 0+ null=0+
  validate_only bool 0+
""", """
  throttle_time_ms int32 0+
  responses [] 0+
    error_code int16 0+
    error_message string 0+ null=0+
    resource_type int8 0+
    resource_name string 0+
""")

DESCRIBE_CLUSTER = define(60, "DescribeCluster", "0-1", 0, """
  include_cluster_authorized_operations bool 0+
  endpoint_type int8 1+ default=1
""", """
  throttle_time_ms int32 0+
  error_code int16 0+
  error_message string 0+ null=0+ default=null
  endpoint_type int8 1+ default=1
  cluster_id string 0+
  controller_id int32 0+ default=-1
  brokers [] 0+
    broker_id int32 0+
    host string 0+
    port int32 0+
    rack string 0+ null=0+ default=null
  cluster_authorized_operations int32 0+ default=-2147483648
""")

DESCRIBE_TOPIC_PARTITIONS = define(75, "DescribeTopicPartitions", "0", 0, """
  topics [] 0+
    name string 0+
  response_partition_limit int32 0+ default=2000
  cursor {} 0+ null=0+ default=null
    topic_name string 0+
    partition_index int32 0+
""", """
  throttle_time_ms int32 0+ ignorable
  topics [] 0+
    error_code int16 0+
    name string 0+ null=0+
    topic_id uuid 0+ ignorable
    is_internal bool 0+ default=false ignorable
    partitions [] 0+
      error_code int16 0+
      partition_index int32 0+
      leader_id int32 0+
      leader_epoch int32 0+ default=-1 ignorable
      replica_nodes []int32 0+
      isr_nodes []int32 0+
      eligible_leader_replicas []int32 0+ null=0+ default=null
      last_known_elr []int32 0+ null=0+ default=null
      offline_replicas []int32 0+ ignorable
    topic_authorized_operations int32 0+ default=-2147483648
  next_cursor {} 0+ null=0+ default=null
    topic_name string 0+
    partition_index int32 0+
""")

ELECT_LEADERS = define(43, "ElectLeaders", "0-2", 2, """
  election_type int8 1+
  topic_partitions [] 0+ null=0+
    topic string 0+
    partitions []int32 0+
  timeout_ms int32 0+ default=60000
""", """
  throttle_time_ms int32 0+
  error_code int16 1+
  replica_election_results [] 0+
    topic string 0+
    partition_result [] 0+
      partition_id int32 0+
      error_code int16 0+
      error_message string 0+ null=0+
""")

DESCRIBE_LOG_DIRS = define(35, "DescribeLogDirs", "0-4", 2, """
  topics [] 0+ null=0+
    topic string 0+
    partitions []int32 0+
""", """
  throttle_time_ms int32 0+
  error_code int16 3+ ignorable
  results [] 0+
    error_code int16 0+
    log_dir string 0+
    topics [] 0+
      name string 0+
      partitions [] 0+
        partition_index int32 0+
        partition_size int64 0+
        offset_lag int64 0+
        is_future_key bool 0+
    total_bytes int64 4+ default=-1 ignorable
    usable_bytes int64 4+ default=-1 ignorable
""")

ALTER_REPLICA_LOG_DIRS = define(34, "AlterReplicaLogDirs", "0-2", 2, """
  dirs [] 0+
    path string 0+
    topics [] 0+
      name string 0+
      partitions []int32 0+
""", """
  throttle_time_ms int32 0+
  results [] 0+
    topic_name string 0+
    partitions [] 0+
      partition_index int32 0+
      error_code int16 0+
""")

ALTER_PARTITION_REASSIGNMENTS = define(45, "AlterPartitionReassignments", "0", 0, """
  timeout_ms int32 0+ default=60000
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      replicas []int32 0+ null=0+ default=null
""", """
  throttle_time_ms int32 0+
  error_code int16 0+
  error_message string 0+ null=0+
  responses [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      error_code int16 0+
      error_message string 0+ null=0+
""")

LIST_PARTITION_REASSIGNMENTS = define(46, "ListPartitionReassignments", "0", 0, """
  timeout_ms int32 0+ default=60000
  topics [] 0+ null=0+ default=null
    name string 0+
    partition_indexes []int32 0+
""", """
  throttle_time_ms int32 0+
  error_code int16 0+
  error_message string 0+ null=0+
  topics [] 0+
    name string 0+
    partitions [] 0+
      partition_index int32 0+
      replicas []int32 0+
      adding_replicas []int32 0+
      removing_replicas []int32 0+
""")
