fn main() {
    std::process::exit(cassist::main_entry());
}
