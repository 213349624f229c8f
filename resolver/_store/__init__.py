"""The on-disk store: compiled rule tables and generated code, cached across processes."""
