"""Unity Catalog: the metastore summary (`routes`)."""
