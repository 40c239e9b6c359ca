{
  description = "cassist: a declarative, reproducible task runner for coding agents";

  inputs = {
    nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";
    flake-utils.url = "github:numtide/flake-utils";
  };

  outputs =
    {
      self,
      nixpkgs,
      flake-utils,
    }:
    flake-utils.lib.eachDefaultSystem (
      system:
      let
        pkgs = nixpkgs.legacyPackages.${system};
        lib = pkgs.lib;
        toml = lib.importTOML ./Cargo.toml;
        manifest = toml.package;
        # The version is the workspace's: every crate of it shares one.
        version = toml.workspace.package.version;

        cassist = pkgs.rustPlatform.buildRustPackage {
          pname = manifest.name;
          inherit version;

          # Inside a git checkout a flake already sees only tracked files; the
          # filter also keeps build output and state dirs out when the flake
          # is used as a plain path.
          src = lib.cleanSourceWith {
            src = ./.;
            filter =
              path: type:
              let
                base = baseNameOf path;
              in
              !(
                type == "directory"
                && builtins.elem base [
                  "target"
                  ".cassist"
                  "node_modules"
                ]
              )
              && lib.cleanSourceFilter path type;
          };

          cargoLock.lockFile = ./Cargo.lock;

          # The test suite drives fake agents and npm-installed agent CLIs
          # from fixtures/; run it with `cargo test` in the dev shell instead.
          doCheck = false;

          meta = {
            description = manifest.description;
            license = with lib.licenses; [
              mit
              asl20
            ];
            mainProgram = "cassist";
            platforms = lib.platforms.unix;
          };
        };
      in
      {
        packages = {
          default = cassist;
          cassist = cassist;
        };

        apps.default = {
          type = "app";
          program = lib.getExe cassist;
          meta.description = manifest.description;
        };

        devShells.default = pkgs.mkShell {
          packages = with pkgs; [
            cargo
            rustc
            clippy
            rustfmt
            rust-analyzer
            # The agent CLIs need Node >= 20. nodejs_20 itself is past
            # end-of-life, marked insecure and dropped from nixpkgs unstable,
            # so take the current LTS.
            nodejs
            python3
            git
            b3sum
            hyperfine
          ];

          # Lets rust-analyzer find the standard library sources.
          RUST_SRC_PATH = "${pkgs.rustPlatform.rustLibSrc}";
        };
      }
    );
}
