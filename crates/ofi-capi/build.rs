//! Links the cdylib as `libfabric.so.1` with libfabric's symbol versions.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libfabric.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/libfabric.map");
    println!("cargo:rerun-if-changed=libfabric.map");
    println!("cargo:rerun-if-changed=build.rs");
}
