mod collect;
mod read_bounded;
mod store;
mod support;
mod workdir_list;
mod workdir_race;
mod workdir_read;
mod workdir_write;
