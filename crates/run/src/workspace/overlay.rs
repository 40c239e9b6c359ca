//! The overlay mode ([`OverlayBacking`]): the workspace is a stack of
//! layers over the project's own path, mounted for each command inside
//! namespaces; the agent's layer, against what the layers below show, is
//! the change.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::cleanup::remove_tree;
use super::ignored::{IgnoreCheck, Literals};
use super::lowers::{Lowers, is_opaque};
use super::tree::{copy_entry, writes_below};
use super::{Backing, Error, IntegrationLayer, Layer, Scan, Site, insert_change};
use crate::entry::{self, Kind};
use cassist_core::changes::Change;
use cassist_core::paths::is_reserved_name;
use cassist_sandbox::sandbox::Overlay;

/// A workspace made of overlay layers: commands run at the project's own
/// path, over which each sees the layers of its [`Layer`].
pub(super) struct OverlayBacking {
    site: Site,
    /// The throw-away layer in use ([`Layer::Scratch`] or [`Layer::Build`]),
    /// if any.
    scratch: Option<Layer>,
}

impl OverlayBacking {
    /// Makes the setup and agent layers (and their work dirs) in the
    /// workspace's folder: a couple of folders, whatever the size of the
    /// project.
    pub(super) fn create(site: Site) -> Result<OverlayBacking, Error> {
        let backing = OverlayBacking { site, scratch: None };
        for layer in [Layer::Setup, Layer::Agent] {
            std::fs::create_dir(backing.layer(layer))?;
            std::fs::create_dir(backing.work_dir(layer))?;
        }
        Ok(backing)
    }

    /// The folder of a writable layer.
    fn layer(&self, layer: Layer) -> PathBuf {
        self.site.base.join(layer.dir_name())
    }

    /// The overlay work dir that goes with a layer.
    fn work_dir(&self, layer: Layer) -> PathBuf {
        self.site.base.join(format!("{}.work", layer.dir_name()))
    }

    /// The read-only layers under `layer`'s, top first; the project last.
    /// The build layer's are `build_stack`, the others' the workspace's
    /// own stack.
    fn lowers(&self, layer: Layer, build_stack: &[Arc<IntegrationLayer>]) -> Vec<PathBuf> {
        let below: &[Layer] = match layer {
            Layer::Setup | Layer::Build => &[],
            Layer::Agent => &[Layer::Setup],
            Layer::Scratch => &[Layer::Agent, Layer::Setup],
        };
        let stack = if layer == Layer::Build { build_stack } else { &self.site.stack };
        below
            .iter()
            .map(|l| self.layer(*l))
            .chain(stack.iter().map(|l| l.dir().to_path_buf()))
            .chain([self.site.root.clone()])
            .collect()
    }

    /// The agent's layer over the layers below it, top first.
    fn agent_view(&self) -> Vec<PathBuf> {
        [self.layer(Layer::Agent)].into_iter().chain(self.lowers(Layer::Agent, &[])).collect()
    }

    /// Writes the agent's view (its layer over the lowers) into the new
    /// folder `to` (see [`Workspace::keep`](super::Workspace::keep)).
    fn materialize(&self, to: &Path, placed: &[String]) -> Result<(), Error> {
        let layers = self.agent_view();
        let ignore = IgnoreCheck::new(&self.site.root, layers.clone());
        let view = Lowers::new(&layers);
        std::fs::create_dir(to)?;
        let mut result = Ok(());
        view.walk(Path::new(""), &mut |rel, real, is_dir, from| {
            let project_only = from == [self.site.root.as_path()];
            if result.is_err()
                || rel.file_name().is_some_and(is_reserved_name)
                || placed.iter().any(|p| Path::new(p) == rel)
                || (project_only && ignore.ignored(rel, is_dir))
            {
                return false;
            }
            let dest = to.join(rel);
            // The files of the workspace's own layers are linked: what the
            // agent wrote (a sparse 2 GiB file...) costs nothing more. What
            // others use (the project, shared layers) is copied.
            let own = real.starts_with(&self.site.base);
            result = if is_dir {
                std::fs::create_dir(&dest)
            } else {
                std::fs::symlink_metadata(real).and_then(|meta| {
                    if own && meta.is_file() && std::fs::hard_link(real, &dest).is_ok() {
                        return Ok(());
                    }
                    copy_entry(real, &dest, &meta)
                })
            };
            is_dir
        });
        Ok(result?)
    }
}

impl Backing for OverlayBacking {
    fn site(&self) -> &Site {
        &self.site
    }

    fn dir(&self) -> &Path {
        &self.site.root
    }

    fn overlay(&self, layer: Layer, build_stack: &[Arc<IntegrationLayer>]) -> Result<Option<Overlay>, Error> {
        if matches!(layer, Layer::Scratch | Layer::Build) && self.scratch != Some(layer) {
            return Err(Error::NoThrowaway(layer));
        }
        Ok(Some(Overlay {
            target: self.site.root.clone(),
            lowers: self.lowers(layer, build_stack),
            upper: self.layer(layer),
            work: self.work_dir(layer),
        }))
    }

    fn begin_throwaway(&mut self, layer: Layer, _build_stack: &[Arc<IntegrationLayer>]) -> Result<(), Error> {
        std::fs::create_dir(self.layer(layer))?;
        std::fs::create_dir(self.work_dir(layer))?;
        self.scratch = Some(layer);
        Ok(())
    }

    fn end_throwaway(&mut self) {
        for layer in [Layer::Scratch, Layer::Build] {
            remove_tree(&self.layer(layer));
            remove_tree(&self.work_dir(layer));
        }
        self.scratch = None;
    }

    /// Nothing to do: the setup layer holds what setup left.
    fn setup_done(&mut self, _literals: &Literals) -> Result<(), Error> {
        Ok(())
    }

    /// Nothing to do: the overlay shows the project's ignored files as
    /// they are.
    fn name_literally(&mut self, _literals: &Literals) -> Result<(), Error> {
        Ok(())
    }

    /// The setup layer, under the agent's.
    fn place_dir(&self) -> PathBuf {
        self.layer(Layer::Setup)
    }

    fn gitignore_layers(&self) -> Vec<PathBuf> {
        self.agent_view()
    }

    /// The agent's layer against what the lowers show (see [`Lowers`]):
    /// every entry of the agent's layer is new, changed, a copy-up of an
    /// unchanged file, or a whiteout.
    fn changes(&self, scan: &mut Scan<'_>) -> Result<Vec<String>, Error> {
        let Scan { reader, ignore, literals, found: out } = scan;
        let mut ignored = Vec::new();
        let upper = self.layer(Layer::Agent);
        let lower_dirs = self.lowers(Layer::Agent, &[]);
        let lowers = Lowers::new(&lower_dirs);
        let mut insert = |c: Change| insert_change(out, c);
        let mut stack = vec![PathBuf::new()];
        while let Some(rel_dir) = stack.pop() {
            let dir = upper.join(&rel_dir);
            // An opaque folder hides everything below it in the lowers.
            if !rel_dir.as_os_str().is_empty() && is_opaque(&dir) {
                for (rel, real) in lowers.files_below(&rel_dir) {
                    if upper.join(&rel).symlink_metadata().is_err() {
                        insert(reader.deleted(&rel, &real));
                    }
                }
            }
            for e in std::fs::read_dir(&dir)? {
                let rel = rel_dir.join(e?.file_name());
                let path = upper.join(&rel);
                let meta = std::fs::symlink_metadata(&path)?;
                // What the lowers show at this path.
                let below = lowers.path(&rel).and_then(|p| std::fs::symlink_metadata(&p).ok().map(|m| (p, m)));
                let below_is_dir = below.as_ref().is_some_and(|(_, m)| m.is_dir());
                if entry::kind(&meta) == Kind::Dir {
                    // An ignored folder is named as a whole, unless the
                    // scope names a file below it.
                    if ignore.ignored(&rel, true) && !literals.names_below(&rel) {
                        if writes_below(&path) {
                            ignored.push(format!("{}/", entry::name(&rel).0));
                        }
                        continue;
                    }
                    // A file (or a symlink, never followed) replaced by a
                    // folder.
                    if let Some((lower, _)) = &below
                        && !below_is_dir
                    {
                        insert(reader.deleted(&rel, lower));
                    }
                    stack.push(rel);
                    continue;
                }
                // A folder replaced by anything else, or deleted (a
                // whiteout): its files are gone.
                if below_is_dir {
                    for (p, real) in lowers.files_below(&rel) {
                        insert(reader.deleted(&p, &real));
                    }
                }
                if entry::is_whiteout(&meta) {
                    if let Some((lower, _)) = &below
                        && !below_is_dir
                    {
                        insert(reader.deleted(&rel, lower));
                    }
                    continue;
                }
                let old = below.filter(|(_, m)| matches!(entry::kind(m), Kind::File | Kind::Symlink));
                // A copy-up (opened for writing, touched) of an unchanged file.
                if let Some((lower, lm)) = &old
                    && entry::same_entry(&path, &meta, lower, lm)?
                {
                    continue;
                }
                if ignore.ignored(&rel, false) && !literals.names(&rel) {
                    ignored.push(entry::name(&rel).0);
                    continue;
                }
                insert(reader.change(&rel, &path, &meta, old.as_ref().map(|(p, m)| (p.as_path(), m)))?);
            }
        }
        Ok(ignored)
    }

    /// The work dirs go (the kernel's, of no use to the user), and the
    /// agent's view is written into `tree`.
    fn keep(&mut self, tree: &Path, placed: &[String]) -> Result<(), Error> {
        for layer in [Layer::Setup, Layer::Agent] {
            remove_tree(&self.work_dir(layer));
        }
        self.materialize(tree, placed)
    }
}
