#![no_main]
libfuzzer_sys::fuzz_target!(init: weir::fuzz::init("sql"), |data: &[u8]| weir::fuzz::sql(data));
