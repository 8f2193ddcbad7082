//! weft-store: placeholder, being written.
