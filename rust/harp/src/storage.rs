//! Storage: local files behind one trait.
