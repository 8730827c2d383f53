//! A/B bench (stub; owned by the bench work).

#[derive(clap::Args)]
pub struct BenchArgs {}

pub fn run(_args: BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("bench: not implemented yet")
}
