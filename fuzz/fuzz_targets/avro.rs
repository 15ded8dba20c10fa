#![no_main]
libfuzzer_sys::fuzz_target!(init: weir::fuzz::init("avro"), |data: &[u8]| weir::fuzz::avro(data));
