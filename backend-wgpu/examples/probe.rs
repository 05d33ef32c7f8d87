// Scratch: mul_mat kernel experiments on lavapipe (not committed).
use std::time::Instant;
use wgpu::util::DeviceExt;

// C[j][i] = sum_k A[i][k] B[j][k]; A [m][k], B [n][k] row-major, k % 4 == 0
fn baseline(tm: u32, tn: u32) -> (String, u32, u32) {
    let mut s = String::from(HEAD);
    s += "@compute @workgroup_size(64)\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n";
    s += &format!(
        "    let i0 = (wid.x * 8u + lid % 8u) * {tm}u; let j0 = (wid.y * 8u + lid / 8u) * {tn}u; let k4 = p.k / 4u;\n"
    );
    for i in 0..tm {
        s += &format!("    let ar{i} = min(i0 + {i}u, p.m - 1u) * k4;\n");
    }
    for j in 0..tn {
        s += &format!("    let bc{j} = min(j0 + {j}u, p.n - 1u) * k4;\n");
    }
    for i in 0..tm {
        for j in 0..tn {
            s += &format!("    var c{i}_{j} = 0.0;\n");
        }
    }
    s += "    for (var kk = 0u; kk < k4; kk++) {\n";
    for i in 0..tm {
        s += &format!("        let a{i} = A[ar{i} + kk];\n");
    }
    for j in 0..tn {
        s += &format!("        let b{j} = B[bc{j} + kk];\n");
        for i in 0..tm {
            s += &format!("        c{i}_{j} += dot(a{i}, b{j});\n");
        }
    }
    s += "    }\n";
    for i in 0..tm {
        for j in 0..tn {
            s += &format!(
                "    if (i0 + {i}u < p.m && j0 + {j}u < p.n) {{ C[(j0 + {j}u) * p.m + i0 + {i}u] = c{i}_{j}; }}\n"
            );
        }
    }
    s += "}\n";
    (s, 8 * tm, 8 * tn)
}

// subgroup (size 8) broadcast: lane owns TM rows; subgroup shares 8*CB columns loaded one per lane
fn sgbc(tm: u32, cb: u32, sgs_rows: u32) -> (String, u32, u32) {
    let mut s = String::new();
    s += HEAD;
    let wg = 8 * sgs_rows;
    s += &format!(
        "@compute @workgroup_size({wg})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sl: u32) {{\n"
    );
    s += &format!(
        "    let sg = lid / 8u; let i0 = (wid.x * {sgs_rows}u + sg) * {r}u + sl * {tm}u; let j0 = wid.y * {c}u; let k4 = p.k / 4u;\n",
        r = 8 * tm,
        c = 8 * cb
    );
    for i in 0..tm {
        s += &format!("    let ar{i} = min(i0 + {i}u, p.m - 1u) * k4;\n");
    }
    for c in 0..cb {
        s += &format!(
            "    let bc{c} = min(j0 + sl + {o}u, p.n - 1u) * k4;\n",
            o = 8 * c
        );
    }
    for i in 0..tm {
        for j in 0..8 * cb {
            s += &format!("    var c{i}_{j} = 0.0;\n");
        }
    }
    s += "    for (var kk = 0u; kk < k4; kk++) {\n";
    for i in 0..tm {
        s += &format!("        let a{i} = A[ar{i} + kk];\n");
    }
    for c in 0..cb {
        s += &format!("        let bl{c} = B[bc{c} + kk];\n");
        for l in 0..8 {
            let j = 8 * c + l;
            s += &format!("        let b{j} = subgroupBroadcast(bl{c}, {l}u);\n");
            for i in 0..tm {
                s += &format!("        c{i}_{j} += dot(a{i}, b{j});\n");
            }
        }
    }
    s += "    }\n";
    for i in 0..tm {
        for j in 0..8 * cb {
            s += &format!(
                "    if (i0 + {i}u < p.m && j0 + {j}u < p.n) {{ C[(j0 + {j}u) * p.m + i0 + {i}u] = c{i}_{j}; }}\n"
            );
        }
    }
    s += "}\n";
    (s, 8 * tm * sgs_rows, 8 * cb)
}

// k-distributed: per 32-value chunk, lane l loads k4-slot l of each of NC columns; rows: TM per lane
fn kdist(tm: u32, nc: u32, sgs: u32) -> (String, u32, u32) {
    let mut s = String::new();
    s += HEAD;
    let wg = 8 * sgs;
    s += &format!(
        "@compute @workgroup_size({wg})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sl: u32) {{\n"
    );
    s += &format!(
        "    let sg = lid / 8u; let i0 = (wid.x * {sgs}u + sg) * {r}u + sl * {tm}u; let j0 = wid.y * {nc}u; let k4 = p.k / 4u;\n",
        r = 8 * tm
    );
    for i in 0..tm {
        s += &format!("    let ar{i} = min(i0 + {i}u, p.m - 1u) * k4;\n");
    }
    for c in 0..nc {
        s += &format!("    let bc{c} = min(j0 + {c}u, p.n - 1u) * k4 + sl;\n");
    }
    for i in 0..tm {
        for j in 0..nc {
            s += &format!("    var c{i}_{j} = 0.0;\n");
        }
    }
    s += "    for (var kk = 0u; kk < k4; kk += 8u) {\n";
    for c in 0..nc {
        s += &format!("        let bl{c} = B[bc{c} + kk];\n");
    }
    for q in 0..8 {
        for i in 0..tm {
            s += &format!("        let a{i}_{q} = A[ar{i} + kk + {q}u];\n");
        }
        for c in 0..nc {
            s += &format!("        let b{c}_{q} = subgroupBroadcast(bl{c}, {q}u);\n");
            for i in 0..tm {
                s += &format!("        c{i}_{c} += dot(a{i}_{q}, b{c}_{q});\n");
            }
        }
    }
    s += "    }\n";
    for i in 0..tm {
        for j in 0..nc {
            s += &format!(
                "    if (i0 + {i}u < p.m && j0 + {j}u < p.n) {{ C[(j0 + {j}u) * p.m + i0 + {i}u] = c{i}_{j}; }}\n"
            );
        }
    }
    s += "}\n";
    (s, 8 * tm * sgs, nc)
}

const HEAD: &str = r#"
struct P { m: u32, n: u32, k: u32, pad: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> A: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> B: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> C: array<f32>;
"#;

fn main() {
    let inst = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(inst.enumerate_adapters(wgpu::Backends::VULKAN)).remove(0);
    let (dev, q) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        required_limits: adapter.limits(),
        required_features: wgpu::Features::SUBGROUP,
        ..Default::default()
    }))
    .unwrap();
    let args: Vec<String> = std::env::args().collect();
    let m: u32 = args.get(1).map(|s| s.parse().unwrap()).unwrap_or(1024);
    let n: u32 = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(1024);
    let k: u32 = args.get(3).map(|s| s.parse().unwrap()).unwrap_or(1024);
    let av: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) / 10.0)
        .collect();
    let bv: Vec<f32> = (0..n * k)
        .map(|i| ((i * 5 % 11) as f32 - 5.0) / 10.0)
        .collect();
    // reference for a few entries
    let a = dev.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: None,
        contents: bytemuck::cast_slice(&av),
        usage: wgpu::BufferUsages::STORAGE,
    });
    let b = dev.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: None,
        contents: bytemuck::cast_slice(&bv),
        usage: wgpu::BufferUsages::STORAGE,
    });
    let c = dev.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: (m * n * 4) as u64,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let rb = dev.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: (m * n * 4) as u64,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let pbuf = dev.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: None,
        contents: bytemuck::cast_slice(&[m, n, k, 0]),
        usage: wgpu::BufferUsages::UNIFORM,
    });
    let mut variants: Vec<(String, (String, u32, u32))> = vec![("base4x4".into(), baseline(4, 4))];
    let spec = std::env::var("V")
        .unwrap_or("4,4,4;8,4,2;4,8,2;8,8,1;2,8,4;4,4,1;4,4,2;16,2,2;16,4,1".into());
    for v in spec.split(';') {
        let x: Vec<u32> = v.split(',').map(|t| t.parse().unwrap()).collect();
        if x.len() == 4 {
            variants.push((
                format!("kd tm{} nc{} r{}", x[0], x[1], x[2]),
                kdist(x[0], x[1], x[2]),
            ));
            continue;
        }
        variants.push((
            format!("sg tm{} cb{} r{}", x[0], x[1], x[2]),
            sgbc(x[0], x[1], x[2]),
        ));
    }
    for (name, (src, rows, cols)) in variants {
        let t0 = Instant::now();
        let sm = dev.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: None,
            source: wgpu::ShaderSource::Wgsl(src.into()),
        });
        let pl = dev.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: None,
            module: &sm,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let bg = dev.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pl.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: pbuf.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: a.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: b.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 3,
                    resource: c.as_entire_binding(),
                },
            ],
        });
        let compile = t0.elapsed();
        let mut best = f64::MAX;
        for _ in 0..5 {
            let mut enc = dev.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pl);
                pass.set_bind_group(0, &bg, &[]);
                pass.dispatch_workgroups(m.div_ceil(rows), n.div_ceil(cols), 1);
            }
            let t = Instant::now();
            let idx = q.submit([enc.finish()]);
            dev.poll(wgpu::PollType::Wait {
                submission_index: Some(idx),
                timeout: None,
            })
            .unwrap();
            best = best.min(t.elapsed().as_secs_f64());
        }
        // check
        let mut enc = dev.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&c, 0, &rb, 0, (m * n * 4) as u64);
        let idx = q.submit([enc.finish()]);
        rb.map_async(wgpu::MapMode::Read, .., |_| {});
        dev.poll(wgpu::PollType::Wait {
            submission_index: Some(idx),
            timeout: None,
        })
        .unwrap();
        let out: Vec<f32> = bytemuck::cast_slice(&rb.get_mapped_range(..).unwrap()).to_vec();
        rb.unmap();
        let mut maxerr = 0f32;
        for (i, j) in [
            (0usize, 0usize),
            (m as usize - 1, n as usize - 1),
            (17, 33),
            (m as usize / 2, 5),
        ] {
            let mut r = 0f32;
            for kk in 0..k as usize {
                r += av[i * k as usize + kk] * bv[j * k as usize + kk];
            }
            maxerr = maxerr.max((out[j * m as usize + i] - r).abs());
        }
        println!(
            "{name:12}: compile {:4.0} ms, {:8.2} ms, {:6.2} GFLOP/s, err {maxerr:.1e}",
            compile.as_secs_f64() * 1e3,
            best * 1e3,
            2.0 * m as f64 * n as f64 * k as f64 / best / 1e9
        );
    }
}
