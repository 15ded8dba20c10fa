#![no_main]
libfuzzer_sys::fuzz_target!(init: weir::fuzz::init("wire"), |data: &[u8]| weir::fuzz::wire(data));
