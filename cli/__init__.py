"""``inferpool COMMAND``: serve, compile, bench. Each command module takes its argv."""
