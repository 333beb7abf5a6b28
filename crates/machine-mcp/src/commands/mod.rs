//! One module per subcommand; [`run`] dispatches.

mod stdio;

use anyhow::Result;
use runtime::policy::{ExecMode, Policy, PolicyOverrides, Profile};

use crate::cli::{Command, ExecModeArg, PolicyArgs, ProfileArg};

/// Runs `command` to completion.
pub(crate) async fn run(command: Command) -> Result<()> {
    match command {
        Command::Stdio(args) => stdio::run(args).await,
    }
}

/// The effective policy from the policy flags.
pub(crate) fn policy(p: &PolicyArgs) -> Policy {
    let profile = match p.profile {
        ProfileArg::Full => Profile::Full,
        ProfileArg::Agent => Profile::Agent,
        ProfileArg::Edit => Profile::Edit,
        ProfileArg::Review => Profile::Review,
    };
    Policy::new(
        profile,
        PolicyOverrides {
            exec_mode: p.exec_mode.map(|m| match m {
                ExecModeArg::Off => ExecMode::Off,
                ExecModeArg::Direct => ExecMode::Direct,
                ExecModeArg::Shell => ExecMode::Shell,
            }),
            no_write: p.no_write,
            unrestricted_paths: p.unrestricted_paths,
            absolute_paths: p.absolute_paths,
            full_env: p.full_env,
        },
    )
}
