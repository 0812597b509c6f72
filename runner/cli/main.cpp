// Purpose: the `exprun` executable: CLI11 subcommands only; all logic lives in the library (App.h).
#include <CLI/CLI.hpp>

#include <iostream>

#include "runner/App.h"
#include "runner/Version.h"

int main(int argc, char** argv) {
  CLI::App app{"exprun: declarative data-parallel training experiments on LibTorch"};
  app.set_version_flag("--version", std::string("exprun ") + EXPRUN_VERSION + " (" + EXPRUN_GIT_COMMIT + ")");
  app.require_subcommand(1);

  exprun::RunArgs run;
  auto* runCmd = app.add_subcommand("run", "train SPEC and write <out>/<name>.json");
  runCmd->add_option("spec", run.spec, "experiment spec (YAML)")->required();
  runCmd->add_option("--set", run.sets, "override a spec value: key.path=value (repeatable)");
  runCmd->add_option("--out", run.outDir, "directory of the result file (default: the spec's output.dir)");
  runCmd->add_flag("--overwrite", run.overwrite, "replace an existing result file");

  std::string validateSpec;
  std::vector<std::string> validateSets;
  auto* validateCmd = app.add_subcommand("validate", "print the fully resolved spec and the model's parameter count");
  validateCmd->add_option("spec", validateSpec, "experiment spec (YAML)")->required();
  validateCmd->add_option("--set", validateSets, "override a spec value: key.path=value (repeatable)");

  std::string kind;
  auto* pluginsCmd = app.add_subcommand("plugins", "list registered plugins and their options");
  pluginsCmd->add_option("kind", kind, "only this kind (model, data, optimizer, scheduler)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : exprun::kExitBadInput;
  }
  if (*runCmd) return exprun::cmdRun(run);
  if (*validateCmd) return exprun::cmdValidate(validateSpec, validateSets);
  if (*pluginsCmd) return exprun::cmdPlugins(kind);
  return exprun::kExitBadInput;
}
