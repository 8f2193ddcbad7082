//! weft-layout: placeholder, being written.
