mod envelope;
mod keydir;
mod names;
mod redact;
mod rollback;
mod rotation;
mod support;
mod tidy;
