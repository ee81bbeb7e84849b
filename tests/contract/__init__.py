"""One contract suite per port, run against every backend (in-memory fake, moto, fakeredis, a real redis-server)."""
