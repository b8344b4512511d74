"""Planning: the config, the study matrix, run identity, precisions, datasheets."""
