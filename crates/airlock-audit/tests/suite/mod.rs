mod chain;
mod export;
mod jcs;
mod line;
mod props;
mod python;
mod support;
