//! Starts the real `evenkeel` binary on an ephemeral loopback port for black-box tests.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct BrokerProcess {
    child: Option<Child>,
    pub bootstrap: String,
    pub data: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl BrokerProcess {
    /// `evenkeel dev --port 0` in a fresh temp dir.
    pub fn start(overrides: &[&str]) -> BrokerProcess {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().to_path_buf();
        let mut b = Self::start_in(&data, overrides);
        b._tmp = Some(tmp);
        b
    }

    /// `evenkeel dev --port 0` on an existing data dir (for restarts).
    pub fn start_in(data: &Path, overrides: &[&str]) -> BrokerProcess {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_evenkeel"));
        cmd.args(["dev", "--port", "0", "--data"])
            .arg(data)
            .args(["--override", "evenkeel.metrics.address=127.0.0.1:0"]);
        for o in overrides {
            cmd.args(["--override", o]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start evenkeel");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            for line in lines.by_ref() {
                let Ok(line) = line else { return };
                if let Some(rest) = line.split(" ready on ").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                    let _ = tx.send(addr);
                }
            }
        });
        let bootstrap = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("broker did not print its ready line");
        BrokerProcess {
            child: Some(child),
            bootstrap,
            data: data.to_path_buf(),
            _tmp: None,
        }
    }

    /// SIGTERM and wait: a clean shutdown. Returns the exit status success.
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        unsafe_sigterm(child.id());
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status.success();
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn take_tempdir(&mut self) -> Option<tempfile::TempDir> {
        self._tmp.take()
    }
}

fn unsafe_sigterm(pid: u32) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
