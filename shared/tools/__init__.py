"""Server-side tools the executors can run, and the registry that names them."""
