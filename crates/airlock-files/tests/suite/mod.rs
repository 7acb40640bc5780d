mod collect;
mod read_bounded;
mod store;
mod support;
