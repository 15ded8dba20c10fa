#![no_main]
libfuzzer_sys::fuzz_target!(init: weir::fuzz::init("values"), |data: &[u8]| weir::fuzz::values(data));
