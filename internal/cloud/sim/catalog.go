package sim

import "github.com/gpuscaler/gpuscaler/internal/cloud"

// DefaultLocations returns the simulated cloud's locations when the config
// names none; they follow Verda's location codes.
func DefaultLocations() []string { return []string{"FIN-01", "FIN-02", "FIN-03", "ICE-01"} }

// DefaultCatalog returns the simulated cloud's instance types, modelled on
// Verda's catalog: type names, GPU counts, vCPUs, memory and hourly prices
// (on-demand and spot) of the same shape and scale.
func DefaultCatalog() []cloud.InstanceType {
	gpuType := func(name, model string, gpus, gpuMem, vcpus, mem int, od, spot float64) cloud.InstanceType {
		return cloud.InstanceType{
			Name: name, GPUModel: model, GPUCount: gpus, GPUMemoryGiB: gpuMem,
			VCPUs: vcpus, MemoryGiB: mem, Arch: "amd64", OnDemandPrice: od, SpotPrice: spot,
		}
	}
	return []cloud.InstanceType{
		gpuType("1GB300.32V", "GB300", 1, 288, 32, 480, 5.45, 1.91),
		gpuType("4GB300.128V", "GB300", 4, 288, 128, 1920, 21.80, 7.63),
		gpuType("1B300.30V", "B300", 1, 288, 30, 275, 4.95, 1.73),
		gpuType("8B300.240V", "B300", 8, 288, 240, 2200, 39.60, 13.86),
		gpuType("1B200.30V", "B200", 1, 180, 30, 184, 3.99, 1.40),
		gpuType("8B200.240V", "B200", 8, 180, 240, 1472, 31.92, 11.17),
		gpuType("1H200.141S.44V", "H200-141GB", 1, 141, 44, 185, 3.39, 1.19),
		gpuType("2H200.141S.88V", "H200-141GB", 2, 141, 88, 370, 6.78, 2.37),
		gpuType("8H200.141S.176V", "H200-141GB", 8, 141, 176, 1450, 27.12, 9.49),
		gpuType("1H100.80S.30V", "H100-80GB", 1, 80, 30, 120, 2.29, 0.8015),
		gpuType("1H100.80S.32V", "H100-80GB", 1, 80, 32, 185, 2.29, 0.8015),
		gpuType("2H100.80S.80V", "H100-80GB", 2, 80, 80, 370, 4.58, 1.603),
		gpuType("4H100.80S.176V", "H100-80GB", 4, 80, 176, 740, 9.16, 3.206),
		gpuType("8H100.80S.176V", "H100-80GB", 8, 80, 176, 1480, 18.32, 6.412),
		gpuType("1A100.22V", "A100-80GB", 1, 80, 22, 120, 1.29, 0.4515),
		gpuType("2A100.44V", "A100-80GB", 2, 80, 44, 240, 2.58, 0.903),
		gpuType("4A100.88V", "A100-80GB", 4, 80, 88, 480, 5.16, 1.806),
		gpuType("8A100.176V", "A100-80GB", 8, 80, 176, 960, 10.32, 3.612),
		gpuType("1A100.40S.22V", "A100-40GB", 1, 40, 22, 120, 0.7211, 0.2524),
		gpuType("8A100.40S.176V", "A100-40GB", 8, 40, 176, 960, 5.7688, 2.0191),
		gpuType("1L40S.20V", "L40S", 1, 48, 20, 60, 0.9143, 0.32),
		gpuType("8L40S.160V", "L40S", 8, 48, 160, 480, 7.3144, 2.56),
		gpuType("1RTXPRO6000.30V", "RTXPRO6000", 1, 96, 30, 180, 1.39, 0.4865),
		gpuType("1RTX6000ADA.10V", "RTX6000ADA", 1, 48, 10, 60, 0.8314, 0.291),
		gpuType("1A6000.10V", "A6000", 1, 48, 10, 60, 0.49, 0.1715),
		gpuType("1V100.6V", "V100-16GB", 1, 16, 6, 23, 0.1381, 0.0483),
		gpuType("8V100.48V", "V100-16GB", 8, 16, 48, 180, 1.1048, 0.3864),
		gpuType("CPU.4V.16G", "", 0, 0, 4, 16, 0.0279, 0.0098),
		gpuType("CPU.32V.128G", "", 0, 0, 32, 128, 0.2232, 0.0781),
	}
}
