//! Installing a Debian package the test harness needs (promtool, Chromium):
//! `apt-get install -y --no-install-recommends`, as root or through
//! password-less `sudo`, refreshing the package lists once when the first
//! attempt fails (a fresh machine's lists may be empty).

use std::process::Command;

/// Installs `packages`, running each apt command through `install`.
pub fn apt_install(
    packages: &[&str],
    install: &impl Fn(&mut Command) -> Result<(), String>,
) -> Result<(), String> {
    let apt = |args: &[&str]| {
        let mut command = if is_root() {
            Command::new("apt-get")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.args(["-n", "apt-get"]);
            sudo
        };
        command.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        install(&mut command)
    };
    let mut package = vec!["install", "-y", "--no-install-recommends"];
    package.extend_from_slice(packages);
    if apt(&package).is_err() {
        apt(&["update"])?;
        apt(&package)?;
    }
    Ok(())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| String::from_utf8_lossy(&output.stdout).trim() == "0")
}
