//! Holdout gate (stub; owned by the bench work).

#[derive(clap::Args)]
pub struct HoldoutArgs {}

pub fn run(_args: HoldoutArgs) -> anyhow::Result<()> {
    anyhow::bail!("holdout: not implemented yet")
}
