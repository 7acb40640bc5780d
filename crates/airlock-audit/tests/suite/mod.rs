mod chain;
mod export;
mod jcs;
mod props;
mod python;
mod support;
