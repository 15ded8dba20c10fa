#![no_main]
libfuzzer_sys::fuzz_target!(init: weir::fuzz::init("stored"), |data: &[u8]| weir::fuzz::stored(data));
