fn main() {
    std::process::exit(cassist::main_entry());
}

// Planning allocates many small values (KDL nodes, paths); mimalloc is
// markedly faster than glibc malloc at that.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
