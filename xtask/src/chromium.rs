//! Headless Chromium and its WebDriver, which the relay console's browser
//! test (`services/outbox-relay/tests/console_browser.rs`, through
//! `testkit::browser`) drives. Like promtool (`promtool.rs`), installed when
//! missing from Debian's `chromium` and `chromium-driver` packages, at the
//! paths `testkit::browser` expects. Idempotent: with both present nothing runs.

use std::path::Path;
use std::process::Command;

/// The driver and the browser, where Debian installs them.
const BINARIES: [&str; 2] = ["/usr/bin/chromedriver", "/usr/bin/chromium"];

/// Makes sure both binaries exist, installing the packages through
/// `install` when either is missing.
pub fn ensure_chromium(install: impl Fn(&mut Command) -> Result<(), String>) -> Result<(), String> {
    if present() {
        return Ok(());
    }
    eprintln!(
        "xtask: installing chromium and chromium-driver (Debian packages, without recommends)"
    );
    crate::debian::apt_install(&["chromium", "chromium-driver"], &install)?;
    if present() {
        Ok(())
    } else {
        Err(format!(
            "chromium packages installed but {} missing",
            BINARIES.join(" or ")
        ))
    }
}

fn present() -> bool {
    BINARIES.iter().all(|path| Path::new(path).exists())
}
