#![no_main]
libfuzzer_sys::fuzz_target!(init: weir::fuzz::init("protobuf"), |data: &[u8]| weir::fuzz::protobuf(data));
