//! K-means job and data generation (filled in with the engine's apps::kmeans).
use clap::Args;
use harp::{Result, Worker};

use crate::cluster::ClusterOpts;

#[derive(Args, Clone, Debug)]
pub struct KmeansArgs {
    #[command(flatten)]
    pub cluster: ClusterOpts,
}
#[derive(Args, Clone, Debug)]
pub struct GenArgs {}

pub fn run(_w: &Worker, _a: &KmeansArgs) -> Result<()> {
    Ok(())
}
pub fn gen(_a: &GenArgs) -> Result<()> {
    Ok(())
}
