"""The transaction coordinator: Kafka's transaction states and transitions, and the `__transaction_state` records it
writes (see docs/architecture.md). It writes through an interface the facade implements (TxnIO), so it imports only
engine.common and the codec's schema notation: never the log layer below it, replication or the facade.
"""
