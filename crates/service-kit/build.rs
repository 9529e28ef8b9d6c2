//! Rebuilds the crate when a migration is added: `sqlx::migrate!` embeds the
//! files of `migrations/` at compile time, but cargo only notices a changed
//! file it was told about, not a new one in the directory.

fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
