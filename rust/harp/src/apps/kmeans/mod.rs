//! K-means (Lloyd's algorithm) on the Map-Collective model.
