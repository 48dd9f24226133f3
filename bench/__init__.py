"""kafkalog's benchmarks: every figure measured beside its peers in the same run (`python -m bench`)."""
