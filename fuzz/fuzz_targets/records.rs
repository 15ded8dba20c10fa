#![no_main]
libfuzzer_sys::fuzz_target!(init: weir::fuzz::init("records"), |data: &[u8]| weir::fuzz::records(data));
