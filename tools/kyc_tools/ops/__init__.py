"""Operations at scale: Prometheus rules, the Grafana dashboard and the Kubernetes
manifests' invariants, generated from the model repository and ``kyc.budgets`` so
that what is watched is what is served (``kyc deploy render``)."""
