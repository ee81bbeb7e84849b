"""Lambda entry points. Each adapts one trigger to the ``shared`` package and holds no behaviour of its own."""
