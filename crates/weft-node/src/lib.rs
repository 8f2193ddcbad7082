//! weft-node: placeholder, being written.
