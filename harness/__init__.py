"""The test harness of ``inferpool bench``, the load tests and the test suite: a server in a
subprocess on a free 127.0.0.1 port (``inferpool.harness.server``), keep-alive HTTP/1.1 clients
(``inferpool.harness.client``), the requests they send (``inferpool.harness.payloads``), the sums read back from
``/metrics`` (``inferpool.harness.metrics``) and a closed- or open-loop load generator (``inferpool.harness.load``,
``inferpool tune``'s). No torch: a load generator shares the machine with the server it
measures."""
