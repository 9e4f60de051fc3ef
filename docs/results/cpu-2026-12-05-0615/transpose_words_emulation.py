import numpy as np
def byte_perm(x, y, s):
    b = [(x >> (8*i)) & 0xFF for i in range(4)] + [(y >> (8*i)) & 0xFF for i in range(4)]
    return sum(b[(s >> (4*n)) & 7] << (8*n) for n in range(4))
def tw(inb, h, w, K, blockDim=256):
    esz = 4 // K
    in32 = inb.view(np.uint32); out32 = np.zeros(h*w*esz//4, np.uint32)
    wi, wo = w // K, h // K
    blocks_r, blocks_c = (wo+31)//32, (wi+31)//32
    for warp in range(blockDim//32):
        for b in range(warp, blocks_r*blocks_c, blockDim//32):
            rb0 = (b // blocks_c)*32
            for lane in range(32):
                cw = (b % blocks_c)*32 + lane
                for d in range(32):
                    rb = rb0 + ((lane+d) & 31)
                    if rb >= wo or cw >= wi: continue
                    if K == 4:
                        a,bb,c,e = (int(in32[(4*rb+i)*wi+cw]) for i in range(4))
                        lab, hab = byte_perm(a,bb,0x5140), byte_perm(a,bb,0x7362)
                        lce, hce = byte_perm(c,e,0x5140), byte_perm(c,e,0x7362)
                        out32[(4*cw)*wo+rb] = byte_perm(lab,lce,0x5410); out32[(4*cw+1)*wo+rb] = byte_perm(lab,lce,0x7632)
                        out32[(4*cw+2)*wo+rb] = byte_perm(hab,hce,0x5410); out32[(4*cw+3)*wo+rb] = byte_perm(hab,hce,0x7632)
                    else:
                        a,bb = int(in32[(2*rb)*wi+cw]), int(in32[(2*rb+1)*wi+cw])
                        out32[(2*cw)*wo+rb] = byte_perm(a,bb,0x5410); out32[(2*cw+1)*wo+rb] = byte_perm(a,bb,0x7632)
    return out32
rng = np.random.default_rng(1)
for dt, K in ((np.uint8, 4), (np.uint16, 2)):
    for h, w in ((16, 16), (32, 48), (8, 256), (256, 16), (128, 64)):
        if h % K or w % K: continue
        a = rng.integers(0, np.iinfo(dt).max, size=(h, w), dtype=dt)
        out = tw(a.reshape(-1).view(np.uint8).copy(), h, w, K).view(dt).reshape(w, h)
        assert (out == a.T).all(), (dt, h, w)
        # bank check for one warp step
print("ok")
for K in (4, 2):
    for wi in range(1, 80):
        for wo in range(1, 80):
            for d in (0, 5, 31):
                lanes = [l for l in range(32) if ((l+d)&31) < wo and l < wi]
                rb = lambda l: (l+d)&31
                rd = {((K*rb(l))*wi + l) % 32 for l in lanes}
                wr = {((K*l)*wo + rb(l)) % 32 for l in lanes}
                assert len(rd) == len(lanes) and len(wr) == len(lanes), (K, wi, wo, d)
print("banks ok")
