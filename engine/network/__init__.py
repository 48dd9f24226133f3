"""The Kafka protocol listener: sockets (socket_server) and the requests' handlers (kafka_apis)."""
