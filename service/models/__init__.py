"""Which models to serve (config, repository, CPU budget), and the host that loads them."""
