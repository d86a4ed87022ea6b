package dl

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Candidates lists where to look for a library, best first:
//
//  1. the file named by $envVar (a full path), when envVar is not empty;
//  2. each soname in every directory of $GPU_LIB_DIRS (colon-separated);
//  3. the bare sonames (LD_LIBRARY_PATH, ld.so.cache, the driver's libraries);
//  4. NVIDIA's pip wheels, as PyTorch installs them: site-packages/nvidia/*/lib and
//     nvidia/cu*/lib under $VIRTUAL_ENV, $CONDA_PREFIX, $PYTHONPATH, ~/.local, /usr/local,
//     /usr, /opt/conda; then /usr/local/cuda*/lib64.
//
// Only existing files are listed from step 4.
func Candidates(envVar string, sonames ...string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	if envVar != "" {
		add(os.Getenv(envVar))
	}
	for _, d := range filepath.SplitList(os.Getenv("GPU_LIB_DIRS")) {
		for _, s := range sonames {
			if d != "" {
				add(filepath.Join(d, s))
			}
		}
	}
	for _, s := range sonames {
		add(s)
	}
	for _, d := range wheelDirs() {
		for _, s := range sonames {
			p := filepath.Join(d, s)
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				add(p)
			}
		}
	}
	return out
}

// wheelDirs returns the existing library folders of NVIDIA's pip wheels and CUDA toolkits.
func wheelDirs() []string {
	var sites []string
	for _, p := range filepath.SplitList(os.Getenv("PYTHONPATH")) {
		if p != "" {
			sites = append(sites, p)
		}
	}
	prefixes := []string{os.Getenv("VIRTUAL_ENV"), os.Getenv("CONDA_PREFIX"), "/usr/local", "/usr", "/opt/conda", "/opt/venv"}
	if h, err := os.UserHomeDir(); err == nil {
		prefixes = append(prefixes, filepath.Join(h, ".local"))
	}
	for _, p := range prefixes {
		if p == "" {
			continue
		}
		for _, lib := range []string{"lib", "lib64"} {
			for _, sp := range []string{"site-packages", "dist-packages"} {
				m, _ := filepath.Glob(filepath.Join(p, lib, "python3*", sp))
				sites = append(sites, m...)
			}
		}
	}
	sites = append(sites, "/usr/lib/python3/dist-packages")
	var globs []string
	for _, s := range sites {
		globs = append(globs, filepath.Join(s, "nvidia", "*", "lib"), filepath.Join(s, "nvidia", "cu*", "lib"),
			filepath.Join(s, "torch", "lib"))
	}
	globs = append(globs, "/usr/local/cuda/lib64", "/usr/local/cuda/targets/*/lib", "/usr/local/cuda-*/lib64")
	var dirs []string
	for _, g := range globs {
		m, _ := filepath.Glob(g)
		dirs = append(dirs, m...)
	}
	return dirs
}

// Searched says where candidates were looked for, for an error: the folders of the paths
// among them and, when a bare soname is among them, LD_LIBRARY_PATH's folders and the
// dynamic linker's cache.
func Searched(candidates []string) string {
	var dirs []string
	bare := false
	for _, c := range candidates {
		if !strings.Contains(c, "/") {
			bare = true
			continue
		}
		if d := filepath.Dir(c); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	s := "folders searched: " + strings.Join(dirs, ", ")
	if len(dirs) == 0 {
		s = "folders searched: none by path"
	}
	if bare {
		s += "; by soname: LD_LIBRARY_PATH=" + os.Getenv("LD_LIBRARY_PATH") + " and the ld.so cache"
	}
	return s
}
