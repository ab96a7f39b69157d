"""The node image cache: one decoded copy of a dataset's images per node (imagecache: the file, its
key and pruning), the Ultralytics datasets that map it (cached_dataset), and the launcher's build of
it before the ranks start (prepare)."""
