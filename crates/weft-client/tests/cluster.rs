//! The client against real meta and node servers on loopback, one test executable for all
//! (put and get, repair, gc, transitions): the four share the cluster harness in `common`,
//! and one executable compiles and links its generic code once instead of four times.

mod common;
mod gc;
mod put_get;
mod repair;
mod transition;
