"""A simulated HA kube-apiserver control plane for the collection's tests, benchmarks and demo."""
