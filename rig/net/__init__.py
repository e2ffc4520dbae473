"""Network truth: round trips and socket state sampled alongside a stream (no help from the
server), and, later, the impairment relay. Reusable per connection, not tied to a session."""
