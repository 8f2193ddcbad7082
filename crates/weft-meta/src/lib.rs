//! weft-meta: placeholder, being written.
