"""kio's request and response entities, as unions over the versions raftka serves."""
